GUIDANCE = 7.5


def set_guidance(value):
    global GUIDANCE
    GUIDANCE = value
