import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.selectors import (
    EVERYTHING,
    MAX_SELECTOR_LENGTH,
    SELECTOR_OVERHEAD_CHARACTERS,
    Operator,
    Requirement,
    Selector,
    SelectorCache,
    SelectorError,
    format_selector,
    parse_selector,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=b", [Requirement("a", Operator.EQUALS, ("b",))]),
        ("a==b", [Requirement("a", Operator.EQUALS, ("b",))]),
        ("a!=b", [Requirement("a", Operator.NOT_EQUALS, ("b",))]),
        ("a in (y,x)", [Requirement("a", Operator.IN, ("x", "y"))]),
        ("a notin (x)", [Requirement("a", Operator.NOT_IN, ("x",))]),
        ("a", [Requirement("a", Operator.EXISTS)]),
        ("!a", [Requirement("a", Operator.DOES_NOT_EXIST)]),
        ("a>3", [Requirement("a", Operator.GREATER_THAN, ("3",))]),
        ("a<3", [Requirement("a", Operator.LESS_THAN, ("3",))]),
        ("a=", [Requirement("a", Operator.EQUALS, ("",))]),
        (
            " karpenter.sh/nodepool = gpu , tier in ( a , b ),!legacy",
            [
                Requirement("karpenter.sh/nodepool", Operator.EQUALS, ("gpu",)),
                Requirement("tier", Operator.IN, ("a", "b")),
                Requirement("legacy", Operator.DOES_NOT_EXIST),
            ],
        ),
    ],
)
def test_parses_every_operator(text, expected):
    assert parse_selector(text).requirements == tuple(expected)


@pytest.mark.parametrize("text", [None, "", "   "])
def test_empty_selector_matches_everything(text):
    selector = parse_selector(text)
    assert selector.empty
    assert selector.matches({}) and selector.matches({"a": "b"})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a in ()", "can't be empty"),
        ("a in (x", "unclosed"),
        ("a in x", "expected '('"),
        ("a,", "trailing ','"),
        (",a", "expected a label key"),
        ("a b", "unknown operator"),
        ("a=b=c", "expected ','"),
        ("-a=b", "invalid label key"),
        ("a=b c", "expected ','"),
        ("a>x", "must be an integer"),
        ("a=" + "x" * 64, "invalid label value"),
        ("Bad_Prefix/a=b", "prefix must be a DNS subdomain"),
        ("!", "expected a label key"),
        ("a=(b)", "expected a value"),
    ],
)
def test_malformed_selectors_say_what_is_wrong(text, fragment):
    with pytest.raises(SelectorError, match=fragment.replace("(", r"\(")):
        parse_selector(text)


def test_huge_selector_is_refused_before_parsing():
    with pytest.raises(SelectorError, match="limit"):
        parse_selector("a=b," * (MAX_SELECTOR_LENGTH // 4 + 1))


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("a=b", {"a": "b"}, True),
        ("a=b", {"a": "c"}, False),
        ("a=b", {}, False),
        ("a!=b", {}, True),  # absent keys satisfy != and notin, as in Kubernetes
        ("a notin (b)", {}, True),
        ("a notin (b)", {"a": "b"}, False),
        ("a in (b,c)", {"a": "c"}, True),
        ("a in (b,c)", {}, False),
        ("a", {"a": ""}, True),
        ("!a", {"a": ""}, False),
        ("a>3", {"a": "4"}, True),
        ("a>3", {"a": "3"}, False),
        ("a<3", {"a": "x"}, False),
        # Integers as Go's strconv.ParseInt reads them: no "1_000", no other scripts' digits, int64 only.
        ("a>3", {"a": "1_000"}, False),
        ("a>3", {"a": "\u0664"}, False),  # ARABIC-INDIC DIGIT FOUR
        ("a>-1", {"a": "9223372036854775808"}, False),
        ("a<3", {"a": "+2"}, True),
        ("a=b,c=d", {"a": "b", "c": "d"}, True),
        ("a=b,c=d", {"a": "b"}, False),
    ],
)
def test_matching_semantics(text, labels, matches):
    assert parse_selector(text).matches(labels) is matches


@pytest.mark.parametrize("bound", ["1_000", "\u0661\u0662", "9223372036854775808", "0x10", "1e3"])
def test_a_bound_go_would_not_parse_is_refused(bound):
    with pytest.raises(SelectorError) as raised:
        parse_selector(f"a>{bound}")
    assert str(raised.value) == f"for '>' the value must be an integer, got {bound!r}"


label_names = st.from_regex(r"[a-z0-9]([-a-z0-9_.]{0,10}[a-z0-9])?", fullmatch=True)
prefixed_keys = st.builds(
    lambda p, n: f"{p}/{n}" if p else n, st.sampled_from(["", "example.com", "karpenter.sh"]), label_names
)
requirements = st.one_of(
    st.builds(lambda k, v: Requirement(k, Operator.EQUALS, (v,)), prefixed_keys, label_names),
    st.builds(lambda k, v: Requirement(k, Operator.NOT_EQUALS, (v,)), prefixed_keys, label_names),
    st.builds(
        lambda k, vs: Requirement(k, Operator.IN, tuple(sorted(vs))),
        prefixed_keys,
        st.sets(label_names, min_size=1, max_size=4),
    ),
    st.builds(
        lambda k, vs: Requirement(k, Operator.NOT_IN, tuple(sorted(vs))),
        prefixed_keys,
        st.sets(label_names, min_size=1, max_size=4),
    ),
    st.builds(lambda k: Requirement(k, Operator.EXISTS), prefixed_keys),
    st.builds(lambda k: Requirement(k, Operator.DOES_NOT_EXIST), prefixed_keys),
)


@given(st.lists(requirements, min_size=1, max_size=6))
def test_format_then_parse_round_trips(reqs):
    selector = Selector(tuple(reqs))
    assert parse_selector(format_selector(selector)) == selector


@given(st.text(max_size=200))
def test_arbitrary_text_parses_or_raises_selector_error(text):
    try:
        selector = parse_selector(text)
    except SelectorError as error:
        assert str(error)
    else:
        assert isinstance(selector, Selector)


@given(st.lists(requirements, min_size=1, max_size=4), st.dictionaries(label_names, label_names, max_size=4))
def test_selector_matches_iff_every_requirement_matches(reqs, labels):
    selector = Selector(tuple(reqs))
    assert selector.matches(labels) == all(r.matches(labels) for r in reqs)


def counted_parses(monkeypatch) -> list[str]:
    """The texts ``SelectorCache`` hands to ``parse_selector`` from now on."""
    import autoscaler.selectors as selectors

    parsed: list[str] = []

    def counting(text):
        parsed.append(text)
        return parse_selector(text)

    monkeypatch.setattr(selectors, "parse_selector", counting)
    return parsed


def test_the_selector_cache_parses_each_text_once_and_gives_what_parse_selector_gives(monkeypatch):
    parsed = counted_parses(monkeypatch)
    cache = SelectorCache()
    for _ in range(3):
        assert cache.parse("pool in (b,a),zone!=x") == parse_selector("pool in (b,a),zone!=x")
        assert cache.parse(None) is EVERYTHING
    assert parsed == ["pool in (b,a),zone!=x"]
    assert cache.characters == SELECTOR_OVERHEAD_CHARACTERS + len("pool in (b,a),zone!=x")


def test_the_selector_cache_keeps_no_refusal_and_is_bounded_by_characters(monkeypatch):
    parsed = counted_parses(monkeypatch)
    texts = [f"k{index} in ({'a' * 40},{'b' * 40})" for index in range(5)]  # of one length: two fit
    entry = SELECTOR_OVERHEAD_CHARACTERS + len(texts[0])
    cache = SelectorCache(max_characters=2 * entry)
    for _ in range(2):
        with pytest.raises(SelectorError, match="unclosed"):
            cache.parse("a in (b")
    assert cache.characters == 0
    for text in texts:
        assert cache.parse(text) == parse_selector(text)
    assert cache.characters == 2 * entry
    parsed.clear()
    for text in texts[3:]:  # the two used last are held
        cache.parse(text)
    assert parsed == []
    heavy = "a in (" + ",".join("v" * 60 for _ in range(10)) + ")"
    assert cache.parse(heavy) == parse_selector(heavy)  # served, but heavier than the bound: never kept
    assert cache.characters == 2 * entry
    cache.parse(texts[4])
    assert parsed == [heavy]
