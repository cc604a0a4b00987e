"""longhaul's PyTorch trainer: the HTTP trainer protocol (docs/serving.md,
"Trainer protocol") over a PyTorch causal LM, so longhaul trains models too
big for its embedded Go trainer on GPUs. Standard library + torch + numpy."""

__version__ = "0.1.0"
