"""What every hop does to a received context (clamp), and what the edge does instead."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Tuple

from ._codec import NEVER, Context


@dataclass(frozen=True)
class Clamped:
    """What clamp changed, in ns; all zero when nothing was."""

    gat_ahead: int = 0
    """How far the GAT was ahead of now (it was set to now)."""
    gat_stale: int = 0
    """How far the GAT was older than now - max_age (it was set to that)."""
    deadline_early: int = 0
    """How far the deadline was before the clamped GAT (it was set to the GAT)."""

    def any(self) -> bool:
        return self != Clamped()


_NOTHING = Clamped()


def clamp(ctx: Context, now: int, max_age: int) -> Tuple[Context, Clamped]:
    """GAT not after ``now`` nor before ``now - max_age`` (floor 0); deadline not
    before the clamped GAT. Class, fanout and hop unchanged."""
    oldest = max(now - max_age, 0)
    if oldest <= ctx.gat <= now and ctx.deadline >= ctx.gat:
        return ctx, _NOTHING  # the honest case: nothing to do, nothing to allocate
    gat, ahead, stale = ctx.gat, 0, 0
    if gat > now:
        ahead, gat = gat - now, now
    elif gat < oldest:
        stale, gat = oldest - gat, oldest
    deadline, early = ctx.deadline, 0
    if deadline < gat:
        early, deadline = gat - deadline, gat
    return replace(ctx, gat=gat, deadline=deadline), Clamped(ahead, stale, early)


@dataclass(frozen=True)
class EdgeRoute:
    """What the edge knows about a route, from its configuration."""

    class_: int = 0
    budget: Optional[int] = None
    """Deadline after arrival in ns, or None for no deadline."""

    def stamp(self, now: int) -> Context:
        """GAT ``now``, hop 0, fanout 1, class and deadline from the route. The
        edge discards any incoming context: it sets tailor-context to the new
        encoding and baggage to baggage_with(incoming, value)."""
        deadline = NEVER if self.budget is None else min(now + self.budget, NEVER - 1)
        return Context(gat=now, deadline=deadline, class_=self.class_)
