"""Entry points: the ``max`` command (``max.entrypoints.cli``) and the offline Python API
(``max.entrypoints.llm.LLM``)."""
