"""Logits processors: what may constrain a step's logits between the model and the sampler.

`logits_process.LogitsProcessor` is the batched, stateful protocol the engine core calls (state
follows requests; `apply` masks the batch logits in place; `accept_token` advances each constrained
request); `json_mode.JsonModeProcessor` implements it with XGrammar for OpenAI's `response_format`.
Processors from higher layers implement the same protocol (the KG constraint lives in
`knowledge_graphs.decoding`); the engine knows them only through it.
"""
