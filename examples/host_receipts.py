# examples/host_receipts.py
"""For hosts: the capability, receipts and their wire shape, every refusal reason, repeats."""

import sys
from collections.abc import Mapping
from typing import Any

import anyio

from live_steering import Input, LiveRuntime, Receipt

FINAL = {"steering.applied": "applied", "steering.held": "held", "steering.unknown": "unknown"}


async def main() -> None:
    store: dict[str, dict[str, Any]] = {}  # stands in for your database, keyed by input id

    def persist(receipt: Receipt) -> None:
        if receipt.accepted:  # refusals are answers, not state: nothing to keep for them
            store[receipt.input_id] = receipt.to_dict()

    def on_event(event: dict[str, Any]) -> None:  # keep stored receipts current
        if event["type"] in FINAL and event["input_id"] in store:
            store[event["input_id"]].update(disposition=FINAL[event["type"]])
            if "reason" in event:
                store[event["input_id"]]["reason"] = event["reason"]

    def write(steer: Input, metadata: Mapping[str, Any]) -> None:
        pass  # the engine's context store

    refused: dict[str, dict[str, Any]] = {}
    async with LiveRuntime(identity_limit=3, max_text_chars=100) as runtime:
        runtime.add_listener(on_event)
        capability = runtime.capability
        assert {k: v for k, v in capability.items() if k != "submit"} == {
            "version": 1,
            "mode": "request_boundary",
            "cancellable": False,
        }
        submit = capability["submit"]

        receipt = await submit(Input("steer", "Too early", id="early"), "gen-1")
        refused["stale-generation"] = receipt.to_dict()  # no generation is running yet

        async with runtime.open_generation("gen-1") as gen:
            generation = runtime.generation
            assert generation is not None
            anchor = generation["id"]  # capture the id, anchor every input to it

            for n in (1, 2, 3):
                persist(await submit(Input("steer", f"Fix {n}", id=f"fix-{n}"), anchor))
            print("queued:", store["fix-1"])

            # An identical repeat answers the current receipt and admits nothing.
            again = await submit(Input("steer", "Fix 1", id="fix-1"), anchor)
            assert again == runtime.receipt("fix-1")

            attempts = {
                "invalid-input": (Input("steer", "   ", id="blank"), anchor),
                "unsupported-kind": (Input("prompt", "Start over", id="other-kind"), anchor),
                "stale-generation": (Input("steer", "Old", id="old"), "gen-0"),
                "identity-conflict": (Input("steer", "Fix one", id="fix-1"), anchor),
                "capacity": (Input("steer", "Fix 4", id="fix-4"), anchor),  # identity_limit=3
            }
            for reason, (steer, anchored_to) in attempts.items():
                receipt = await submit(steer, anchored_to)
                assert (receipt.accepted, receipt.disposition, receipt.reason) == (False, None, reason)
                refused[reason] = receipt.to_dict()
            assert runtime.statistics().identities == 3  # refusals used no identity slot

            await gen.boundary(write)  # the engine's next request boundary
            assert not gen.continue_after_checkpoint()  # admission closes here
            receipt = await submit(Input("steer", "Just one more", id="late"), anchor)
            refused["finishing"] = receipt.to_dict()

        # After the generation ended, a repeat still answers its current receipt (C10).
        again = await submit(Input("steer", "Fix 1", id="fix-1"), "gen-1")
        print("repeat after the end:", again.to_dict())
        assert again.disposition == "applied"

        try:
            await submit("Use the corrected path", "gen-1")  # not an Input: a caller's bug
        except TypeError as error:
            print("TypeError:", error)
        else:
            raise AssertionError("a str is not an Input")

    # Closed: refused; the runtime's memory of receipts is still readable.
    receipt = await runtime.submit_steering(Input("steer", "Anyone there?", id="after"), "gen-1")
    refused["closed"] = receipt.to_dict()
    async with LiveRuntime(boundary_delivery=False) as native:  # the provider steers natively
        assert native.capability["mode"] == "unavailable"
        receipt = await native.submit_steering(Input("steer", "Hello", id="x"), "any")
        refused["unavailable"] = receipt.to_dict()

    for reason, wire in refused.items():
        assert wire["reason"] == reason
        print(f"{reason:>18}: {wire}")
    assert store["fix-1"] == {
        "accepted": True,
        "inputId": "fix-1",
        "generationId": "gen-1",
        "disposition": "applied",
    }
    assert set(store) == {"fix-1", "fix-2", "fix-3"}
    print("stored:", store["fix-1"])


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
