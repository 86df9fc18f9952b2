"""The training loop's live log kept in memory, for the benchmarks that read the logged rows back."""


class RowLog:
    """The loop's live log in memory: ``rows`` as logged; ``train_rows``: those with ``train/loss``."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def start(self, resume_step: int = 0) -> None:
        pass

    def log(self, step: int, values: dict) -> None:
        self.rows.append({"step": step, **values})

    @property
    def train_rows(self) -> list[dict]:
        return [r for r in self.rows if "train/loss" in r]
