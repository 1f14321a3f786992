"""PyTorch's precision rules, executed: where it accumulates, what dtype it returns, what the knobs do.

Submodules, one job each:

- :mod:`.accumulation` probes the accumulator dtype (``acc_type``) of reductions and matmuls;
- :mod:`.dtypes` finds the output dtype of ops, the reductions that refuse a dtype, and
  ``addmm``'s one rounding against ``mm`` + ``add``;
- :mod:`.hardware` reads what this CPU offers and which oneDNN kernel each matmul ran (rule 1);
- :mod:`.knobs` reads the ``fp32_precision`` tree and puts every precision knob back
  (``knobs_restored``);
- :mod:`.knob_effects` measures what the matmul knobs do on CPU;
- :mod:`.knob_actions` tabulates what each precision action writes, reports and changes;
- :mod:`.threads` measures whether bf16/fp16 reductions depend on the thread count;
- :mod:`.collectives` all-reduces bf16 gradients in a simulated world, communicating in bf16
  or fp32;
- :mod:`.fsdp_launch` launches FSDP2 on real gloo ranks and reports what reduced the gradients;
  :mod:`.fsdp_rank` is one such rank (``python -m explainers.precision.fsdp_rank``);
- :mod:`.fsdp_data` turns dtypes and ``ReduceOp``\\ s into plain data;
- :mod:`.fsdp_decision` shows where FSDP2 decides: divide factors, its source, ``grad_dtype``;
- :mod:`.fsdp_tables` tabulates FSDP2 runs per policy and release;
- :mod:`.topk_router` holds the two top-k router formulas (a self-contained file: torch only);
- :mod:`.router` compares them in floating point;
- :mod:`.router_ties` sweeps their expert choices over logit scales and isolates why they differ;
- :mod:`.compile_rounding` shows eager rounding after every op and a fused kernel once;
- :mod:`.compile_issue` runs pytorch/pytorch#163449's graph and settings on CPU;
- :mod:`.compile_mechanism` switches off each cause of its eager/compile differences on its own.

>>> from explainers.precision import accumulation
>>> accumulation.PROBE_OPS["sum"][0].__name__
'_sum'
"""
