"""Foreign formats. interop/hf.py is the only module that knows Hugging Face names."""
