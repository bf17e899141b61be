"""Foreign formats: the only package that knows Hugging Face names (hf.py, hf_names.py; BERT's,
torch-free for the NumPy Mini-BERT, in bert_names.py)."""
