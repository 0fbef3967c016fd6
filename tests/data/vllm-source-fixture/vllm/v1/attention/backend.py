class AttentionBackend:
    supported_kv_cache_dtypes: ClassVar[list] = ["auto", "bfloat16"]

    @classmethod
    def get_supported_head_sizes(cls):
        return []

    @classmethod
    def supports_head_size(cls, head_size):
        supported_head_sizes = cls.get_supported_head_sizes()
        return (not supported_head_sizes) or head_size in supported_head_sizes

    @classmethod
    def supports_kv_cache_dtype(cls, kv_cache_dtype):
        if kv_cache_dtype is None:
            return True
        return (not cls.supported_kv_cache_dtypes) or (
            kv_cache_dtype in cls.supported_kv_cache_dtypes)

    @classmethod
    def is_mla(cls):
        return False

    @classmethod
    def supports_sliding_window(cls):
        return False

    @classmethod
    def supports_attn_type(cls, attn_type):
        return attn_type == AttentionType.DECODER
