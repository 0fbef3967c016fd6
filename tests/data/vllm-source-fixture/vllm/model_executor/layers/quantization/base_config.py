class QuantizationConfig:
    @classmethod
    def get_min_capability(cls) -> int:
        raise NotImplementedError
