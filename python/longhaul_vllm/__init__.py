"""longhaul's side of a vLLM server: a worker extension that reloads a run's
exported Hugging Face safetensors into the served model, for
`generator.api: vllm` with `generator.reload_method: longhaul_reload_weights`
(docs/serving.md, "vLLM: the longhaul_vllm worker extension").

Start vLLM with `--worker-extension-cls longhaul_vllm.worker.LonghaulWorkerExtension`
and this directory's parent on PYTHONPATH. Nothing here imports vLLM at
module level: the checkpoint reading and checks are plain torch."""

__version__ = "0.1.0"
