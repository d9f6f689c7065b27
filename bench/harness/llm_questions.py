"""Twenty everyday questions, phrased the way people say them to a voice assistant.

Used by ``bench/quality/llm_choice.py`` to compare the packaged language models' spoken replies.
"""

from __future__ import annotations

QUESTIONS: tuple[str, ...] = (
    "What's a good way to fall asleep faster?",
    "How long should I boil an egg for a runny yolk?",
    "Can you tell me a quick joke?",
    "Why is the sky blue?",
    "What should I cook tonight with rice and chicken?",
    "How many minutes are in three and a half hours?",
    "Is it okay to water plants in the evening?",
    "What's the capital of Australia?",
    "Give me one tip to stay focused while working from home.",
    "How do I get a red wine stain out of a shirt?",
    "What's the difference between weather and climate?",
    "Can you suggest a name for my new puppy?",
    "How far away is the moon?",
    "What should I bring on a day hike?",
    "Why do cats purr?",
    "How do I say thank you in Spanish?",
    "What's a healthy snack I can have before the gym?",
    "How often should I change my toothbrush?",
    "Can you help me calm down? I'm a bit stressed.",
    "What's a fun thing to do on a rainy weekend?",
)
