"""Speak: speech synthesis (Kokoro, flite), word alignment and the clause splitter that feeds it."""
