_CONFIG_REGISTRY = LazyConfigDict(toy_vl="ToyVLConfig", toy="ToyConfig")
