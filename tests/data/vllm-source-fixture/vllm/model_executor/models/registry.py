_TEXT_GENERATION_MODELS = {
    "ToyForCausalLM": ("toy", "ToyForCausalLM"),
    "ToyMoeForCausalLM": ("toy_moe", "ToyMoeForCausalLM"),
}
_EMBEDDING_MODELS = {"ToyEmbedModel": ("toy", "ToyEmbedModel")}
_MULTIMODAL_MODELS = {"ToyVLForConditionalGeneration": ("toy_vl", "ToyVL")}
_SPECULATIVE_DECODING_MODELS = {"ToyEagle3": ("toy_eagle3", "ToyEagle3")}
_PREVIOUSLY_SUPPORTED_MODELS = {"OldToyForCausalLM": "9.8.0"}
