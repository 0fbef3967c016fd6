class ToyMLABackend(AttentionBackend):
    @staticmethod
    def get_name():
        return "TOY_MLA"

    @classmethod
    def is_mla(cls):
        return True

    @classmethod
    def supports_compute_capability(cls, capability):
        return capability.major in [9, 10]
