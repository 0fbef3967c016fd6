class RocmPlatform(Platform):
    supported_quantization: list[str] = ["toyint4"]
