"""linnet.serve: a serving engine over any Linnet engine, with a fixed number of cache rows and continuous batching.

nano-vllm's split, one concept per module:
  config.py       ServeConfig: rows, positions per row, queue bound, prefill chunking
  request.py      a request, its sampling parameters, and the events it streams out
  rows.py         the pool of cache rows (slots): allocate on admission, free on completion
  scheduler.py    the waiting queue and the running rows: who is admitted, which prompt chunks run this step
  sampling.py     temperature / top-p sampling of logits, for the requests that ask for it
  model_step.py   one step of the model: prefill chunks and a batched decode step over an Engine
  backends.py     adapters that make an Engine for (checkpoint, rows, positions, dtype, device) per backend
  engine_loop.py  ServeEngine: schedule -> run -> postprocess, on its own thread
  client.py       AsyncClient: submit from asyncio and receive the streamed tokens
  server.py       the OpenAI-compatible HTTP API (`linnet serve`)
  triton.py       `linnet export triton`: a Triton Inference Server model repository that runs linnet.serve
"""
