"""Twenty scripted multi-session conversations for the long-term memory bench (``bench/quality/memory.py``).

Each conversation is told in sessions: facts stated in the first, some corrected or forgotten later, questions
asked in a later session. A probe is a question, the words the current fact must hold, and words no recalled note
may hold (a corrected or forgotten fact). The first ten are the training half, which the extraction rules were
fitted on; the last ten are held out and were never used to change a rule.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    """A question asked in a later session: ``expect`` must be in a recalled note, ``never`` in none."""

    question: str
    expect: tuple[str, ...] = ()
    never: tuple[str, ...] = ()


@dataclass(frozen=True)
class Conversation:
    """Sessions of user turns (each a list of ``(heard reply before, user words)``), then the probes."""

    name: str
    sessions: tuple[tuple[tuple[str, str], ...], ...]
    probes: tuple[Probe, ...]


def _turns(*said: str) -> tuple[tuple[str, str], ...]:
    return tuple(("", words) for words in said)


TRAINING = (
    Conversation("name", (_turns("Hi there, my name is Ana.", "What's the weather like?"),),
                 (Probe("What's my name?", ("Ana",)),)),
    Conversation("allergy", (_turns("I'm allergic to peanuts, so be careful with recipes."),),
                 (Probe("Can I eat this satay sauce?", ("peanuts",)),)),
    Conversation("address", (_turns("Please call me Dr. Li."),), (Probe("How should you address me?", ("Dr. Li",)),)),
    Conversation("units", (_turns("I prefer metric.", "How far is the moon?"),),
                 (Probe("How tall is Everest?", ("metric",)),)),
    Conversation("corrected name", (_turns("My name is Jon."), _turns("Actually, my name is John, with an h.")),
                 (Probe("Do you remember my name?", ("John",), ("Jon.",)),)),
    Conversation("moved", (_turns("I live in Porto."), _turns("I just moved to Berlin last week.")),
                 (Probe("Where do I live?", ("Berlin",), ("Porto",)),)),
    Conversation("forgotten job", (_turns("I work as a nurse."), _turns("Please forget that I work as a nurse.")),
                 (Probe("What is my job?", (), ("nurse",)),)),
    Conversation("answered name", ((("Hello! What should I call you?", "Maria."),),),
                 (Probe("Who am I?", ("Maria",)),)),
    Conversation("several facts", (_turns("My name is Sam and I live in Leeds.", "I'm vegetarian."),),
                 (Probe("Any dinner ideas for me?", ("vegetarian",)), Probe("Where do I live?", ("Leeds",)))),
    Conversation("explicit", (_turns("Remember that my car is parked on level 3."),),
                 (Probe("Where did I park my car?", ("level 3",)),)),
)

HELD_OUT = (
    Conversation("name, held out", (_turns("Hello, my name's Tomasz. Nice to meet you."),),
                 (Probe("Do you know who I am?", ("Tomasz",)),)),
    Conversation("allergy, held out", (_turns("Just so you know, I have a shellfish allergy."),),
                 (Probe("Is this shrimp pasta okay for me?", ("shellfish",)),)),
    Conversation("address, held out", (_turns("You can call me Professor Okafor."),),
                 (Probe("What do you call me?", ("Okafor",)),)),
    Conversation("units, held out", (_turns("I'd prefer imperial units, please."),),
                 (Probe("How heavy is a bowling ball?", ("imperial",)),)),
    Conversation("corrected allergy", (_turns("I'm allergic to cats."),
                                       _turns("Sorry, I'm allergic to dogs, not cats.")),
                 (Probe("Which pets am I allergic to?", ("dogs",), ("cats.",)),)),
    Conversation("corrected home", (_turns("I live in Lyon."), _turns("I moved to Marseille in March.")),
                 (Probe("Which city do I live in?", ("Marseille",), ("Lyon",)),)),
    Conversation("forgotten home", (_turns("I live in Oslo."), _turns("Forget where I live, please.")),
                 (Probe("Where do I live?", (), ("Oslo",)),)),
    Conversation("pet", (_turns("My dog is called Biscuit."),), (Probe("What's my dog's name?", ("Biscuit",)),)),
    Conversation("birthday and diet", (_turns("My birthday is on the 4th of May.", "Also, I'm vegan."),),
                 (Probe("When is my birthday?", ("4th of May",)), Probe("What should I cook tonight?", ("vegan",)))),
    Conversation("forgotten note", (_turns("Remember that my locker code is 4512."),
                                    _turns("Please forget my locker code.")),
                 (Probe("What's my locker code?", (), ("4512",)),)),
)
