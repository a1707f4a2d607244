"""The machinery behind the eager API (``max.tensor``, ``max.functional``, ``max.random``):
realization contexts (``context``), lifting graph functions to Tensors with a cache of compiled
one-op graphs (``dispatch``, ``compiled``), and printing (``fmt``). Users import the public modules."""
