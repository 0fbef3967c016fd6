CacheDType = Literal["auto", "bfloat16", "fp8", "fp8_e4m3"]
