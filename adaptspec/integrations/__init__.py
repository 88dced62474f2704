"""Engine integrations: vLLM plugin, SGLang adapter."""
