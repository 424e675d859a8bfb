"""``live_steering.hooks``: steer agents whose only surface is a hook reply (CONTRACT.md C26).

A thin public face over ``live_steering._hooks``. One ``HookSession`` per live
session: ``enqueue(command_id, text)`` when a host sends an instruction,
``on_hook(moment, reply_would_be_empty=...)`` at every hook moment, and return
``outcome.reply`` (when not ``None``) as the hook's JSON reply. ``PROFILES``
holds each vendor's eligible moments, cap and session-end moment as data.
See docs/hooks.md.
"""

from ._session import (
    DEFAULT_QUEUE_CAPACITY,
    PROFILES,
    REDACTED,
    SEPARATOR,
    EnqueueResult,
    HookOutcome,
    HookSession,
    HookSessionStatistics,
    InstructionReceipt,
    InstructionRefusal,
    InstructionState,
    ReplyShape,
    SkipReason,
    Vendor,
    VendorProfile,
)

__all__ = [
    # the per-session queue and what it answers
    "HookSession",
    "HookOutcome",
    "InstructionReceipt",
    "EnqueueResult",
    "HookSessionStatistics",
    # closed vocabularies
    "InstructionRefusal",
    "InstructionState",
    "SkipReason",
    # vendor data
    "Vendor",
    "VendorProfile",
    "ReplyShape",
    "PROFILES",
    # constants
    "DEFAULT_QUEUE_CAPACITY",
    "SEPARATOR",
    "REDACTED",
]
