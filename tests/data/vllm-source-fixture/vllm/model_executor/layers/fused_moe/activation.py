class MoEActivation(Enum):
    SILU = "silu"
    GELU = "gelu"
    SWIGLUOAI = "swigluoai"
