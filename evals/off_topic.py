"""Questions a biomedical abstract collection (SciFact) does not cover: the off-topic set of the refusal
calibration (`evals.refusal`), the policy rates (`evals.policy_rates`) and the tests of refusals."""

from __future__ import annotations

OFF_TOPIC: tuple[str, ...] = (
    "Who won the 2018 FIFA World Cup?",
    "How do I reset the password of my home router?",
    "What is the capital of Australia?",
    "What is the best way to learn to play the guitar?",
    "When was the Eiffel Tower built?",
    "How many moons does Jupiter have?",
    "What is a good recipe for sourdough bread?",
    "Which programming language is best for web development?",
    "How do I change a flat tyre on a bicycle?",
    "Who wrote the novel Pride and Prejudice?",
    "What is the exchange rate between the euro and the dollar?",
    "How tall is Mount Everest?",
    "What are the rules of chess castling?",
    "How do I file my income tax return?",
    "What time zone is Tokyo in?",
    "Who painted the Mona Lisa?",
    "How do I grow tomatoes on a balcony?",
    "What is the plot of the film Inception?",
    "How fast can a cheetah run?",
    "What is the population of Canada?",
    "How do I install Python on Windows?",
    "Which team has won the most NBA championships?",
    "What is the difference between a violin and a viola?",
    "How do airplanes stay in the air?",
    "What is the speed of light in a vacuum?",
    "Where is the Great Barrier Reef?",
    "How do I make a paper airplane?",
    "What language is spoken in Brazil?",
    "Who invented the telephone?",
    "What is the tallest building in the world?",
)
"""30 general questions (sport, travel, cooking, software, geography, ...); none is about biomedicine."""
