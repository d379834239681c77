"""The language-model stage: prompt layout, engines and the streaming client."""
