class ToyTritonExperts(FusedMoEExperts):
    @staticmethod
    def _supports_activation(activation):
        return activation in [MoEActivation.SILU, MoEActivation.GELU]

    @staticmethod
    def _supports_quant_scheme(weight_key, activation_key):
        return weight_key is None


class ToyMarlinExperts(FusedMoEExperts):
    @staticmethod
    def _supports_activation(activation):
        return activation == MoEActivation.SILU
