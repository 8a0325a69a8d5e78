import pytest

from engine.sampling_params import InvalidRequestError, SamplingParams


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", -0.1, "temperature"),
        ("top_p", 0.0, "top_p"),
        ("top_p", 1.5, "top_p"),
        ("max_tokens", 0, "max_tokens"),
        ("min_p", 1.5, "min_p"),
        ("repetition_penalty", 0.0, "repetition_penalty"),
        ("logprobs", 21, "logprobs"),
    ],
)
def test_bad_sampling_parameters_name_the_field(field, value, message):
    params = SamplingParams(**{field: value})
    with pytest.raises(InvalidRequestError, match=message):
        params.validate()
    assert issubclass(InvalidRequestError, ValueError)


def test_defaults_are_valid():
    SamplingParams().validate()
    assert SamplingParams(temperature=0).greedy
