"""Turn-taking: when the caller starts and finishes a turn, and what a voice over the bot is."""
