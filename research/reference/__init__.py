"""Side by side with other projects' NCF: TF Model Garden (its own venv) and NVIDIA's PyTorch.

Nothing of theirs is copied here: ``setup_reference_env.sh`` installs Model Garden into
``research/.reference-venv``; ``nvidia_ncf.py setup`` copies NVIDIA's code into an ignored folder.
"""
