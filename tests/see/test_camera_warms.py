"""When the camera message is warmed: once when a reply completes, again at the next turn's speech start only
where the message changed since, never over a live reply, and never by a note change alone."""

from __future__ import annotations

from bargein.session.camera_warms import CameraWarms
from bargein.session.core import vocabulary as v


class Camera:
    """The message a fake session's camera would quote now."""

    def __init__(self) -> None:
        self.message: str | None = "EXIT 12"
        self.replies = True


def warms(camera: Camera) -> CameraWarms:
    return CameraWarms(lambda: camera.message, lambda: camera.replies)


def answered_turn(rule: CameraWarms, n: int) -> None:
    """A turn committed, answered, its reply completed (as the machine's actions and the reply's close say)."""
    rule.on_action(v.CommitBuffer(f"item_{n}", 0.0, 1000.0))
    rule.on_action(v.StartReply(f"resp_{n}", "turn_detected", None))
    rule.on_action(v.CompleteReply(f"resp_{n}", "completed"))


def test_a_turn_start_warms_only_a_message_the_model_has_not_read_after_this_history() -> None:
    camera = Camera()
    rule = warms(camera)
    assert rule.on_action(v.SpeechStarted("item_1", 0.0))  # the session's first turn: never warmed
    answered_turn(rule, 1)
    assert rule.on_reply_completed()  # the history grew by the turn and its reply
    assert not rule.on_action(v.SpeechStarted("item_2", 5000.0))  # the same message: already read
    camera.message = "GATE 7"  # the camera moved on between turns
    rule.on_action(v.SpeechStopped("item_2", 6000.0, True))
    assert rule.on_action(v.SpeechStarted("item_3", 7000.0))
    assert not rule.on_action(v.SpeechStarted("item_3", 7000.0))  # once per message


def test_a_note_changing_mid_speech_warms_nothing_and_the_cores_warm_counts_as_read() -> None:
    camera = Camera()
    rule = warms(camera)
    assert rule.on_action(v.SpeechStarted("item_1", 0.0))
    for text in ("GATE 7", "PLATFORM 4", "GATE 9"):  # a new scene in every frame while the user speaks
        camera.message = text
        assert not rule.on_action(v.ReportPartial("item_1", "which"))
    assert not rule.on_action(v.WarmPrompt("item_1", "which exit"))  # the core warms; the rule only notes it
    assert rule.warmed == "GATE 9"
    assert not rule.on_action(v.SilenceBegan("item_1", 1500.0))


def test_no_warm_over_a_live_reply_without_a_note_or_for_a_client_that_asks_for_its_replies() -> None:
    camera = Camera()
    rule = warms(camera)
    rule.on_action(v.StartReply("resp_1", "turn_detected", None))
    assert not rule.on_action(v.SpeechStarted("item_1", 0.0))  # the reply's end, so the history, is not known
    rule.on_action(v.CancelReply("resp_1", "turn_detected"))
    camera.message = None
    assert not rule.on_action(v.SpeechStarted("item_2", 1000.0))
    camera.message, camera.replies = "EXIT 12", False
    assert not rule.on_reply_completed()
    camera.replies = True
    assert rule.on_reply_completed()


def test_nothing_counts_as_read_where_warms_reach_no_model() -> None:
    camera = Camera()
    rule = CameraWarms(lambda: camera.message, lambda: camera.replies, lambda: False)
    assert not rule.on_action(v.SpeechStarted("item_1", 0.0))
    rule.on_action(v.WarmPrompt("item_1", "which exit"))
    assert rule.warmed is None and not rule.on_reply_completed()
