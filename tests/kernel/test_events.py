"""event_from_dict rebuilds every event class from its JSON, and refuses what would mislead a view."""

import dataclasses
import json
import types
import typing

import pytest

from swarm_app.kernel import events
from swarm_app.kernel.events import Event, PeerRow, PeersUpdated, RoundFinished, RoundMetrics, event_from_dict


def sample_value(hint, seed: int):
    """A non-default value of the field type `hint` (so a field that is not rebuilt shows)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return sample(hint, seed)
    if origin is tuple:
        return tuple(sample_value(args[0], seed + i) for i in range(2))
    if origin is dict:
        return {"basic_arithmetic": 0.25 + seed, "base_conversion": 0.5}
    makers = {int: lambda: 7 + seed, float: lambda: 0.125 + seed, str: lambda: f"text-{seed}", bool: lambda: True}
    assert hint in makers, f"extend sample_value for {hint} (and events._convert if needed)"
    return makers[hint]()


def sample(cls, seed: int = 0):
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: sample_value(hints[f.name], seed + i) for i, f in enumerate(dataclasses.fields(cls))})


EVENT_CLASSES = sorted((cls for cls in vars(events).values()
                        if isinstance(cls, type) and issubclass(cls, Event) and cls is not Event),
                       key=lambda cls: cls.__name__)


def test_the_list_covers_the_events_views_use():
    names = {cls.__name__ for cls in EVENT_CLASSES}
    assert {"RoundFinished", "PeersUpdated", "RunStarted", "RunStopped", "LogRecorded", "PhaseProgress"} <= names


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda cls: cls.__name__)
def test_every_event_survives_a_json_round_trip(cls):
    event = sample(cls)
    rebuilt = event_from_dict(json.loads(json.dumps(event.to_dict())))
    assert type(rebuilt) is cls
    assert rebuilt == event


def test_nested_metrics_and_peer_rows_come_back_typed():
    finished = event_from_dict(json.loads(json.dumps(sample(RoundFinished).to_dict())))
    assert isinstance(finished.metrics, RoundMetrics) and finished.metrics.external_signal_share is not None
    peers = event_from_dict(json.loads(json.dumps(sample(PeersUpdated).to_dict())))
    assert isinstance(peers.peers, tuple) and [type(row) for row in peers.peers] == [PeerRow, PeerRow]


def test_optional_fields_take_none_and_defaults_may_be_left_out():
    data = sample(RoundFinished).to_dict()
    data["metrics"]["reward_external"] = None
    del data["metrics"]["heldout_acc"]
    metrics = event_from_dict(data).metrics
    assert metrics.reward_external is None and metrics.heldout_acc is None


def test_keys_a_newer_node_adds_are_ignored():
    data = {**sample(events.RoundStarted).to_dict(), "added_later": [1, 2]}
    assert event_from_dict(data) == sample(events.RoundStarted)


def test_an_int_is_taken_for_a_float_field():
    event = event_from_dict({"event": "LogRecorded", "level": "info", "message": "hi", "time": 12})
    assert event.time == 12.0 and isinstance(event.time, float)


@pytest.mark.parametrize("data, message", [
    ({"event": "RoundLaunched", "round": 1}, "unknown event 'RoundLaunched'"),
    ({"round": 1}, "unknown event None"),
    ({"event": "Event"}, "unknown event 'Event'"),
    ({"event": "RoundStarted"}, "RoundStarted: missing round"),
    ({"event": "RoundStarted", "round": "3"}, "RoundStarted.round: '3' is not a int"),
    ({"event": "RoundStarted", "round": True}, "RoundStarted.round: True is not a int"),
    ({"event": "RoundStarted", "round": 1.5}, "RoundStarted.round: 1.5 is not a int"),
    ({"event": "SharingChanged", "sharing": 1}, "SharingChanged.sharing: 1 is not a bool"),
    ({"event": "RoundFinished", "metrics": [1, 2]}, "RoundMetrics: expected an object, got list"),
    ({"event": "EvaluationFinished", "round": 1, "accuracy": 0.5, "per_task": "x"},
     "EvaluationFinished.per_task: 'x' is not a dict"),
    ({"event": "EvaluationFinished", "round": 1, "accuracy": None}, "EvaluationFinished.accuracy: None is not a float"),
])
def test_bad_messages_raise_value_error(data, message):
    with pytest.raises(ValueError) as caught:
        event_from_dict(data)
    assert str(caught.value) == message


def test_a_message_that_is_not_an_object_raises_value_error():
    with pytest.raises(ValueError, match="not list"):
        event_from_dict([])  # type: ignore[arg-type]
