def load(name):
    return AutoProcessor.from_pretrained(name, trust_remote_code=True)
