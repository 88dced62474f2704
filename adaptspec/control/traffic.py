"""Traffic shape per worker: moving averages of finished requests' prompt and generated tokens."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrafficShape:
    """Moving averages of finished requests' prefilled prompt tokens and generated tokens (weight 1/32 each;
    the first request sets both), for the cost model's prefill terms. Kept by the proxy per worker (and by
    the simulator, which plays the proxy)."""

    prompt_tokens: float = 0.0
    output_tokens: float = 0.0

    def note(self, prompt: float, output: float) -> None:
        if output <= 0 or prompt < 0:
            return
        if self.output_tokens <= 0:
            self.prompt_tokens, self.output_tokens = prompt, output
        else:
            self.prompt_tokens += (prompt - self.prompt_tokens) / 32.0
            self.output_tokens += (output - self.output_tokens) / 32.0

    @property
    def prefill_ratio(self) -> float:
        """Prompt tokens prefilled per generated token (0 until a request finished)."""
        return self.prompt_tokens / self.output_tokens if self.output_tokens > 0 else 0.0
