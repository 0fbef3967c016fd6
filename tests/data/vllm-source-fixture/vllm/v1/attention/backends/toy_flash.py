class ToyFlashBackend(AttentionBackend):
    supported_dtypes: ClassVar[list] = [torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto", "bfloat16", "fp8"]

    @staticmethod
    def get_name():
        return "TOY_FLASH"

    @classmethod
    def supports_head_size(cls, head_size):
        if head_size % 8 != 0:
            return False
        if head_size <= 256:
            return True
        if is_fa_version_supported(4):
            return head_size <= 512
        return False

    @classmethod
    def supports_kv_cache_dtype(cls, kv_cache_dtype):
        if kv_cache_dtype not in cls.supported_kv_cache_dtypes:
            return False
        if is_quantized_kv_cache(kv_cache_dtype):
            return flash_attn_supports_fp8()
        return True

    @classmethod
    def supports_compute_capability(cls, capability):
        return capability >= DeviceCapability(8, 0)

    @classmethod
    def supports_sliding_window(cls):
        return True

    @classmethod
    def supports_attn_type(cls, attn_type):
        return attn_type in (AttentionType.DECODER, AttentionType.ENCODER)
