class ToyFp8Config(QuantizationConfig):
    def get_name(self):
        return "toyfp8"

    def get_supported_act_dtypes(self):
        return [torch.bfloat16, torch.half]

    @classmethod
    def get_min_capability(cls) -> int:
        return 89


class ToyInt4Config(QuantizationConfig):
    def get_name(self):
        return "toyint4"

    @classmethod
    def get_min_capability(cls) -> int:
        return 75
