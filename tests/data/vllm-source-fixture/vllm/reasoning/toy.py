@ReasoningParserManager.register_module("toy_think")
class ToyThinkParser:
    pass
