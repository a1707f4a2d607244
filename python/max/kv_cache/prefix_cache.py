"""The page pool of the paged KV cache, with prefix caching.

Every page has a reference count. A full page can be given a name: a hash of every token from
the start of the sequence to the page's end (a chain: the hash of the previous page's name and
this page's tokens). A request whose tokens begin like an earlier request's finds those names
and shares the pages instead of recomputing their keys and values.

Only full pages are shared, and a request writes only from its first uncached position, which
lies on a page boundary past every page it shares: no page is ever written while shared, so no
copy-on-write is needed. When its last user lets go of a named page, the page keeps its
contents and its name (a later request may still match it) until a fresh page is needed and no
never-named page is free; then the least recently released named page is evicted."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

ROOT = b""


def page_name(parent: bytes, tokens: np.ndarray) -> bytes:
    """The name of a full page holding `tokens`, after the page named `parent` (``ROOT`` for the
    first page). The name covers every token before it, so equal names mean equal prefixes."""
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(np.ascontiguousarray(tokens, dtype=np.int64).tobytes())
    return h.digest()


def page_names(tokens: np.ndarray, page_size: int, count: int, parent: bytes = ROOT) -> list[bytes]:
    """Names of the first `count` full pages of `tokens`."""
    names = []
    for i in range(count):
        parent = page_name(parent, tokens[i * page_size : (i + 1) * page_size])
        names.append(parent)
    return names


class PagePool:
    """`num_pages` pages: free, in use (reference-counted), or cached (named, unused)."""

    def __init__(self, num_pages: int) -> None:
        self.num_pages = int(num_pages)
        self._free: list[int] = list(range(self.num_pages - 1, -1, -1))
        self._refs = [0] * self.num_pages
        self._cached: OrderedDict[int, None] = OrderedDict()  # named pages nobody uses, oldest first
        self._by_name: dict[bytes, int] = {}
        self._name_of: dict[int, bytes] = {}
        self.evictions = 0

    @property
    def num_available(self) -> int:
        """Pages a request can take now: free ones and cached ones (which would be evicted)."""
        return len(self._free) + len(self._cached)

    @property
    def num_cached(self) -> int:
        """Named pages no request uses (kept for later matches)."""
        return len(self._cached)

    @property
    def num_named(self) -> int:
        return len(self._by_name)

    def take(self) -> int:
        """A fresh page for one user: a never-named free page, else the oldest cached one."""
        if self._free:
            page = self._free.pop()
        elif self._cached:
            page, _ = self._cached.popitem(last=False)
            del self._by_name[self._name_of.pop(page)]
            self.evictions += 1
        else:
            raise RuntimeError("PagePool: no page is free")
        self._refs[page] = 1
        return page

    def give_back(self, page: int) -> None:
        """One user lets go of `page`."""
        refs = self._refs[page]
        if refs <= 0:
            raise RuntimeError(f"PagePool: page {page} is not in use")
        self._refs[page] = refs - 1
        if refs == 1:
            if page in self._name_of:
                self._cached[page] = None
            else:
                self._free.append(page)

    def match(self, names: Sequence[bytes]) -> list[int]:
        """The pages of the longest run of `names` that are cached or in use, each now with one
        more user."""
        pages = []
        for name in names:
            page = self._by_name.get(name)
            if page is None:
                break
            pages.append(page)
        for page in pages:
            if self._refs[page] == 0:
                del self._cached[page]
            self._refs[page] += 1
        return pages

    def matched(self, names: Sequence[bytes]) -> int:
        """How many leading `names` are cached or in use (``match`` without taking them)."""
        n = 0
        for name in names:
            if name not in self._by_name:
                break
            n += 1
        return n

    def name(self, page: int, name: bytes) -> None:
        """Records that in-use `page` is full and holds the prefix called `name`. When another
        page already has that name (two requests computed the same prefix), this one stays
        unnamed and is freed as usual."""
        if name in self._by_name or page in self._name_of:
            return
        self._by_name[name] = page
        self._name_of[page] = name

    def forget(self) -> None:
        """Drops every name: cached pages become free; pages in use stay in use, unnamed."""
        for page in self._cached:
            self._free.append(page)
        self._cached.clear()
        self._by_name.clear()
        self._name_of.clear()

    def refs(self, page: int) -> int:
        return self._refs[page]


__all__ = ["PagePool", "ROOT", "page_name", "page_names"]
