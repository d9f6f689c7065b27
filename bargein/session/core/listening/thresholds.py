"""Every threshold of the listening policy, named and explained in one place.

Set by hand from measurements (the listening benchmark's training voice families,
``bench/quality/turn_quality.py``), not fitted, unless a docstring says otherwise; the fitted weights live in the
JSON files beside this module. The rules that read them are in :mod:`~bargein.session.core.listening.classifier`
(any segment) and :mod:`~bargein.session.core.listening.decide` (a segment over a reply in English), in decision
order.
"""

from __future__ import annotations

# -- the classifier's rules (classifier.py: any segment not judged by decide.py) ----------------------------------

MIN_QUERY_SPEECH_MS = 250.0
"""Less VAD speech than this is too short to be a query."""
MIN_LEVEL_ABOVE_FLOOR_DB = 3.0
"""Speech at 5 dB SNR measures 5-7 dB above the floor; below 3 dB it is no louder than the room."""
UNSURE_NO_SPEECH_PROB = 0.6
"""Over this no-speech probability, with an average log-probability under :data:`UNSURE_LOGPROB`, the recogniser
doubts the segment was speech (the classifier's rule and decide.py's alike)."""
UNSURE_LOGPROB = -0.7
"""See :data:`UNSURE_NO_SPEECH_PROB`."""
INVENTED_NO_SPEECH_PROB = 0.3
"""A phrase the recogniser invents for non-speech ("Thank you.") is noise when its no-speech probability is over
this, or its average log-probability under :data:`INVENTED_LOGPROB`."""
INVENTED_LOGPROB = -0.8
"""See :data:`INVENTED_NO_SPEECH_PROB`."""
BACKCHANNEL_MAX_WORDS = 3
"""Over a reply, a transcript of at most this many words that is all one acknowledgement is a backchannel."""
FRAGMENT_WORDS = 2
FRAGMENT_SPEECH_MS = 700.0
FRAGMENT_LOGPROB = -0.6
"""A fragment this short (:data:`FRAGMENT_WORDS` words, under :data:`FRAGMENT_SPEECH_MS` of speech) and this unsure
is a vocal sound or a mumble, not a query: one-word commands such as "Stop." or "Why?" come out near -0.3, the
vocal sounds near -0.8."""
KNOWN_FRAGMENT_LOGPROB = -1.0
"""A lone "yeah" or "okay" may answer the agent and comes out near -0.4: it must be very unsure to be noise."""
FAST_SPEECH_MAX_MS = 600.0
"""Segments shorter than this are held to :data:`MAX_WORDS_PER_S`."""
MAX_WORDS_PER_S = 7.0
"""Fast speech is 4 to 5 words a second; a groan recognised as "I was sick." in 0.26 s is not speech."""
BLIP_MS = 300.0
BLIP_LOGPROB = -0.5
"""A blip (under :data:`BLIP_MS` of speech) the recogniser is this unsure of is noise."""
SHORT_INTERRUPTION_WORDS = 3
SHORT_INTERRUPTION_MS = 600.0
SURE_LOGPROB = -0.3
"""Over a reply, a short segment (at most :data:`SHORT_INTERRUPTION_WORDS` words, under
:data:`SHORT_INTERRUPTION_MS`) with no command or question word cuts only when the recogniser is this sure of it:
a short sound that became some other word with middling confidence is a groan, not a turn."""

# -- the noise floor (segment_stats.py) ----------------------------------------------------------------------------

NOISE_FLOOR_START_DB = -70.0
"""The floor before any background frame was heard."""
NOISE_FLOOR_RATE = 0.05
"""How fast the floor follows the background once it has its first estimate (a running mean before that)."""
BACKGROUND_PROBABILITY = 0.2
"""Frames the VAD scores under this are background, which the floor follows (a floor that followed speech would
hide it)."""

# -- over a reply in English (decide.py) --------------------------------------------------------------------------

OVER_REPLY_MIN_SPEECH_MS = 150.0
"""A one-syllable "No." can hold under 250 ms of VAD speech; below this it is a click or a breath."""
OVER_REPLY_MIN_LEVEL_DB = 3.0
"""Below this many dB above the noise floor a segment over a reply is too faint (as
:data:`MIN_LEVEL_ABOVE_FLOOR_DB`)."""
UNSURE_MAX_MS = 1000.0
"""The recogniser's "no speech here" is trusted on short segments only: over a long one that merged the
user with a background talker it doubts the whole and would throw the user's command away."""
COMMAND_LEVEL_DB = 8.0
"""A command word in a segment this far above the noise floor interrupts on its own."""
COMMAND_MAX_WORDS = 6
"""A longer utterance is judged as a whole, not by a command word in it."""
COMMAND_WITHIN_WORDS = 3
"""A command or question word interrupts only among the first this many words."""

# -- the spoken-command model's gate (keyword.py) -----------------------------------------------------------------

SPOKEN_COMMAND_MIN_SPEECH_MS = 150.0
"""The spoken-command model judges no segment with less speech than this."""
SPOKEN_COMMAND_MIN_LEVEL_DB = 8.0
"""As for a command word in the transcript: a command must be clearly above the room."""
SPOKEN_COMMAND_QUIETER_THAN_USER_DB = 6.0
"""A segment this far under the user's own turns is the room's: the spoken-command model does not judge it."""
MANDARIN_COMMAND_MAX_SPEECH_MS = 1200.0
"""Longer Mandarin segments are sentences: the transcript decides those (a command there is a whole phrase)."""
ENGLISH_COMMAND_MAX_SPEECH_MS = 1600.0
"""English judges up to 1.6 s of speech: over a background talker the segment holds the talker's phrase as well as
the user's "okay" (the model reads the loud stretch)."""

# -- the user's own voice against the room's (own_voice.py, user_words.py, segment_book.py) ----------------------

QUIETER_THAN_USER_DB = 6.0
"""Speech this far under the level of the user's own answered turns is another voice in the room (set, not
fitted: a television or a second talker sits 10 dB or more under a user at the microphone). A loud stretch (the
primed recognition's) is held against the user's own loud stretches: on the training families' live dump the
user's commands, queries, backchannels and vocal sounds over a reply measure at most 5.8 dB under them by that
measure, the background talker's phrases alone at least 6.7 dB; against the user's whole speech, as before, the
talker's phrases came to 3.5 dB, and passed."""
MIXED_ROOM_MS = 500.0
"""A segment with this much of the room's speech in it is mixed: its whole recognition holds the room's words.
Set from the training families' dump: the user alone measures 0-300 ms (onsets and tails)."""
ALONE_ROOM_MS = 300.0
"""A segment with at most this much of the room's speech is the user alone: on the training families' dump the user
alone measured 0-300 ms (a soft onset, a tail). Between this and :data:`MIXED_ROOM_MS` a segment is neither: at
its first pause a segment the talker will fill may not have reached the mixed line yet."""
LOUD_SPEECH_PROBABILITY = 0.8
"""In a segment mixed with the room, below this mean speech probability over the loud stretch the loudest sound
is not a voice. On the training families' live dump, the user's speech in a mixed segment measured 0.91-1.0
there, a tone, a chord or pink noise at the user's level over a talker 0.16-0.73 in 3 of 8 mixed cases (the
others 0.89-0.97: the talker fills the loud stretch too). Outside a mixed segment the measure is not used:
Silero's probability lags a short word's onset, and a clean "Why?" scored 0.56 there."""
LONGEST_ASIDE_MS = 2500.0
"""Speech at the user's own level (a segment's speech less the room's) beyond this is more than a backchannel
or a vocal sound: the user said something. On the training families' live dump the cases that must let the
reply go on held at most 1,568 ms of it (a talker's phrase near the user's level joined to an "okay"), and
1,792 ms on the held-out families' dump; full queries up to 4.7 s. Set with a margin over those, not fitted.
It exists for clean read speech whose quieter stretches count as the room's: a 5.6 s sentence held 1,376 ms
of them, and its loud stretch alone, recognised primed, came back "Okay."."""
ROOM_WORD_BELOW_LOUDEST_DB = 7.0
"""A word this far under the loudest word of its segment is the room's, not the user's."""
USER_LEVEL_RATE = 0.5
"""Each answered turn moves the user's reference level halfway to its own."""

# -- the loud stretch (over_reply.py) -----------------------------------------------------------------------------

LOUD_WITHIN_DB = 8.0
"""Frames within this much of the segment's loudest (smoothed) level are the user's voice."""
LOUD_GAP_MS = 320.0
"""Loud runs this close together are one utterance ("No, stop." has a pause inside)."""
SMOOTH_FRAMES = 3
"""Frame levels are smoothed over this many frames before the loud stretch is looked for."""
SPAN_MARGIN_MS = 150.0
"""Audio kept either side of the loud stretch when it is recognised (a word's soft onset and tail)."""
TRANSIENT_FRAMES = 3
"""At most this many of a turn's loudest speech frames may be a transient (a plosive's pop, a bump of the
microphone lasts a frame or two): the user's reference loud level leaves them out."""
TRANSIENT_OVER_DB = 6.0
"""A frame this far over the loudest frame that is not a transient stands out as one; a voice's own loudest
frames lie within a few dB of each other, so clean speech loses none."""

# -- cutting a paused reply before the endpoint (early_cut.py) ----------------------------------------------------

FADE_FRAMES = 4
"""Frames under the loud line after the user's loud stretch before it counts as ended while the room talks on."""
FADE_MAX_FRAMES = 320
"""Segments are watched for the end of their loud stretch up to 10 s (each frame costs one pass over them)."""
EARLY_CUT_BELOW_USER_DB = 3.0
"""A command spotted before the endpoint cuts only if the segment's loud stretch is at most this far under the
loud stretches of the user's own turns (set on the training families, when the reference was the user's whole
speech: commands in a room measured -3.4 to 2.9 dB, the background talker's phrases that cut early 3.4 to 6 dB;
held like with like, their live dump measures commands and full queries -3.3 to 4.7 dB, 206 of 208 under 3 dB,
and the talker's phrases alone 6.7 dB and more). A quieter one waits for the endpoint's verdict."""

# -- questions and corrections over a reply (turn_words.py) --------------------------------------------------------

QUESTION_MAX_WORDS = 12
"""A question rule judges utterances of at most this many words (Mandarin: characters); a longer one is a request
of its own, which the fitted model cuts (it cuts nearly every worded segment of that length)."""
QUESTION_WITHIN_WORDS = 4
"""A question word counts among the first this many words: "okay, but how?" asks, "tell me what you think about
it" is a request the model judges."""
CORRECTION_MAX_WORDS = 6
"""An utterance opening with "no" or "wrong" of at most this many words is a correction ("no, the other one")."""
TURN_WORDS_LEVEL_DB = 8.0
"""A question or a correction takes the turn only this far above the noise floor (as a command word,
:data:`COMMAND_LEVEL_DB`): a voice clearly louder than the room."""
TURN_WORDS_MIN_LOGPROB = -1.0
"""A question or a correction takes the turn only when the recogniser's average log-probability is at least this:
a background talker's words under the user's "okay" came back at -1.06 ("and remember and what way in the third
year."); the user's own short questions and commands come out near -0.3 to -0.8. Set, not fitted."""
