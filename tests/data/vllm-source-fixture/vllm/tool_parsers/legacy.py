@ToolParserManager.register_module(["toy_legacy", "toy_legacy2"])
class ToyLegacyParser:
    pass
