def _get_backend_priorities(use_mla, device_capability, num_heads=None):
    if use_mla:
        if device_capability.major == 10:
            return [AttentionBackendEnum.TOY_MLA]
        return [AttentionBackendEnum.TOY_MLA]
    if device_capability.major == 10:
        return [AttentionBackendEnum.TOY_FLASHINFER, AttentionBackendEnum.TOY_FLASH]
    return [AttentionBackendEnum.TOY_FLASH, AttentionBackendEnum.TOY_FLASHINFER]
