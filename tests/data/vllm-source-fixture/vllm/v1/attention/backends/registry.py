class AttentionBackendEnum(Enum, metaclass=_Meta):
    TOY_FLASH = "vllm.v1.attention.backends.toy_flash.ToyFlashBackend"
    TOY_FLASHINFER = "vllm.v1.attention.backends.toy_flashinfer.ToyFlashInferBackend"
    TOY_MLA = "vllm.v1.attention.backends.mla.toy_mla.ToyMLABackend"
