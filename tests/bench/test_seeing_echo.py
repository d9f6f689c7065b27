"""The seeing bench's echo count: which replies open on the camera message instead of the question (issue 44)."""

from __future__ import annotations

from bench.latency.seeing_echo import echo_count, echoes, opening


def test_an_opening_that_repeats_the_camera_message_or_speaks_of_the_user_is_an_echo() -> None:
    assert echoes("The user's camera, as read by a text and face detector. The sky is blue.")
    assert echoes('It shows writing that reads exactly: "ROOM 1.94"; no face; bright light.')
    assert echoes('Camera: writing "EXIT 4"; one face.')
    assert echoes("The user is asking about the moon.")
    assert echoes("THE IMAGE shows a sign!")
    assert echoes("You should cook something light with no face and little motion.")


def test_an_answer_is_no_echo_even_when_a_later_sentence_mentions_the_camera() -> None:
    assert not echoes("A spider has eight legs.")
    assert not echoes("Light from the sun scatters off the air, so the sky looks blue.")
    assert not echoes("The moon is about 384,000 km away. Your camera shows no writing.")
    assert opening("Grass is green. It grows.") == "Grass is green."
    assert opening("No sentence end here") == "No sentence end here"
    assert opening("Pi is 3.14 or so. Yes.") == "Pi is 3.14 or so."


def test_the_count_leaves_out_empty_replies() -> None:
    assert echo_count(["The user's camera shows a sign.", "Paris.", "  "]) == "1 of 2"
