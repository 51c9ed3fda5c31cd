"""NCCL's vocabulary: one grammar of NCCL_ALGO / NCCL_PROTO read by validation, the cost model and the exports."""

import pytest

from commprof import nccl_vocab as v


def test_every_spelling_names_the_same_entry():
    for text in ("CollnetDirect", "collnetdirect", "COLLNET_DIRECT", "collnet_direct"):
        assert v.named(v.ALGORITHMS, text).tuner == "collnet_direct"
    assert v.named(v.COLLECTIVES, "all_reduce") is v.named(v.COLLECTIVES, "AllReduce") is v.COLLECTIVES[0]
    assert v.named(v.PROTOCOLS, "SIMPLE").model == "Simple" and v.named(v.PROTOCOLS, "LL129") is None
    # NCCL's own enum order, as 2.20-2.23 TUNING lines number them (src/include/nccl_common.h).
    assert v.ALGO_BY_NUMBER == ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
    assert v.PROTO_BY_NUMBER == ("LL", "LL128", "SIMPLE") and v.MODEL_PROTOCOLS == ("LL", "LL128", "Simple")


def test_selection_segments():
    (everywhere, allreduce) = v.parse_selection("NCCL_ALGO", "ring;AllReduce:^tree,nvls")
    assert everywhere.collective is None and [n.env for n in everywhere.names] == ["Ring"]
    assert allreduce.collective.model == "all_reduce" and allreduce.excluding
    assert [n.env for n in allreduce.names] == ["Tree", "NVLS"]


@pytest.mark.parametrize(
    "value, problem",
    [
        ("bogus", "'bogus' is not an algorithm (allowed: a comma list of Ring, Tree,"),
        ("ring,tre", "'ring,tre': 'tre' is not an algorithm"),
        ("allreduc:tree", "'allreduc' is not a collective"),
        ("all_reduce:tree", "'all_reduce' is not a collective"),  # NCCL knows only its own names
        ("collnet_direct", "'collnet_direct' is not an algorithm"),
        ("allreduce:tree;allreduce:ring", "'allreduce' is given twice"),
        ("ring;tree", "'tree' has no collective: only the first segment may omit it"),
        ("allreduce:tree;ring", "'ring' has no collective"),  # parseList: "All entries except the first"
        ("^", "'' is not an algorithm"),
    ],
)
def test_selection_errors_name_the_part(value, problem):
    with pytest.raises(ValueError) as info:
        v.parse_selection("NCCL_ALGO", value)
    assert problem in str(info.value)


def test_modelled_selection_per_plan_collective():
    assert v.modelled_selection("NCCL_ALGO", "allreduce:tree") == {
        "all_reduce": {"tree"},
        "all_gather": None,
        "reduce_scatter": None,
    }
    assert v.modelled_selection("NCCL_ALGO", "ring;allreduce:tree")["all_gather"] == {"ring"}
    assert v.modelled_selection("NCCL_ALGO", "^tree")["all_reduce"] == {"ring", "nvls"}
    assert v.modelled_selection("NCCL_ALGO", "pat")["all_reduce"] == set()  # never used inside one node
    assert v.modelled_selection("NCCL_PROTO", "broadcast:LL") == dict.fromkeys(v.PLAN_COLLECTIVES)
    assert v.modelled_selection("NCCL_PROTO", "^LL128")["reduce_scatter"] == {"LL", "Simple"}


@pytest.mark.parametrize(
    "variable, value, collective, expected",
    [
        ("NCCL_ALGO", "Ring", "all_reduce", "ring"),
        ("NCCL_ALGO", "allreduce:tree", "all_reduce", "tree"),
        ("NCCL_ALGO", "allreduce:tree", "all_gather", None),
        ("NCCL_ALGO", "ring;allreduce:tree", "all_reduce", "tree"),
        ("NCCL_ALGO", "ring;allreduce:tree", "all_gather", "ring"),
        ("NCCL_ALGO", "ring,tree;allreduce:tree", "all_reduce", "tree"),  # its own segment wins
        ("NCCL_ALGO", "Tree,Ring", "all_reduce", None),
        ("NCCL_ALGO", "^tree", "all_reduce", None),
        ("NCCL_ALGO", "NVLSTree", "all_reduce", "nvls_tree"),
        ("NCCL_ALGO", "CollnetDirect", "AllReduce", "collnet_direct"),
        ("NCCL_PROTO", "LL128", "all_reduce", "ll128"),
        ("NCCL_PROTO", "simple", "allgather", "simple"),
        ("NCCL_PROTO", "Bogus", "all_reduce", None),
        ("NCCL_PROTO", None, "all_reduce", None),
    ],
)
def test_forced_single_choice_in_tuner_spelling(variable, value, collective, expected):
    choice = v.forced(variable, value, collective)
    assert (choice.tuner if choice else None) == expected
