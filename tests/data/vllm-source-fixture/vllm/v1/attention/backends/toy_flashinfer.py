class ToyFlashInferBackend(AttentionBackend):
    @staticmethod
    def get_name():
        return "TOY_FLASHINFER"

    @classmethod
    def get_supported_head_sizes(cls):
        return [64, 128, 256]

    @classmethod
    def supports_compute_capability(cls, capability):
        return capability.major >= 8 and capability.major != 11
