"""The LLM servers the agent starts itself (llama.cpp's, llama-cpp-python's, vLLM's)."""
