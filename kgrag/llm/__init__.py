"""The LLM: calls and their cache, the client factory, backends, prompts, textualizers, constraints."""
