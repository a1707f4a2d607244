"""The pipeline machinery: configuration, registry, model sources, contexts, decoder models,
sampling and the generation loop."""
