"""Think: the language model (llama.cpp in process, or any OpenAI-compatible server), prompts and sampling."""
