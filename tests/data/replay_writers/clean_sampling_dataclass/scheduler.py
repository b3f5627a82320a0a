"""The scheduler picks the next request and applies its sampling settings."""


class Scheduler:
    def __init__(self, gen_config, requests):
        self.gen_config = gen_config
        self.waiting = list(requests)

    def next_request(self):
        req = self.waiting.pop(0)
        self.gen_config.temperature = req.temperature  # write
        return req
