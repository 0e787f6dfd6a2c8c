"""Strategies, one file per method, registered by name."""

from fedshare.strategies.base import (
    STRATEGIES,
    Message,
    Phase,
    SetupContext,
    Strategy,
    Update,
    make_strategy,
    register_strategy,
)
from fedshare.strategies.bsm_fedavg import BSMFedAvg
from fedshare.strategies.ccvr import CCVR
from fedshare.strategies.centralized import Centralized
from fedshare.strategies.dsfl import DSFL
from fedshare.strategies.ensemble import Ensemble
from fedshare.strategies.feature_recalibration import FeatureRecalibration
from fedshare.strategies.fedaa import FedAA
from fedshare.strategies.fedavg import FedAvg
from fedshare.strategies.fedavg_ft import FedAvgFT
from fedshare.strategies.fedbabu import FedBABU
from fedshare.strategies.fedbe import FedBE
from fedshare.strategies.fedbn import FedBN
from fedshare.strategies.fedbr import FedBR
from fedshare.strategies.feddata import FedData
from fedshare.strategies.feddecorr import FedDecorr
from fedshare.strategies.feddistill import FedDistill
from fedshare.strategies.feddyn import FedDyn
from fedshare.strategies.fedgen import FedGen
from fedshare.strategies.fedgen_input import FedGenInput
from fedshare.strategies.fedgh import FedGH
from fedshare.strategies.fedkd import FedKD
from fedshare.strategies.fedkt import FedKT
from fedshare.strategies.fedlc import FedLC
from fedshare.strategies.fedmix import FedMix
from fedshare.strategies.fedmrl import FedMRL
from fedshare.strategies.fedntd import FedNTD
from fedshare.strategies.fedopt import FedAdagrad, FedAdam, FedAvgM, FedYogi
from fedshare.strategies.fedpft import DPFedPFT, FedPFT
from fedshare.strategies.fedpft_chain import FedPFTChain
from fedshare.strategies.fedproto import FedProto
from fedshare.strategies.fedprox import FedProx
from fedshare.strategies.fedrs import FedRS
from fedshare.strategies.fedtgp import FedTGP
from fedshare.strategies.flea import FLea
from fedshare.strategies.fml import FML
from fedshare.strategies.kd import KnowledgeDistillation
from fedshare.strategies.lg_fedavg import LGFedAvg
from fedshare.strategies.local_only import LocalOnly
from fedshare.strategies.moon import MOON
from fedshare.strategies.oneshot_avg import OneShotAverage
from fedshare.strategies.rebafl import ReBaFL
from fedshare.strategies.scaffold import Scaffold
from fedshare.strategies.standalone import Standalone
from fedshare.strategies.xormixfl import MixFL, XorMixFL

__all__ = [
    "CCVR",
    "DSFL",
    "FML",
    "MOON",
    "STRATEGIES",
    "BSMFedAvg",
    "Centralized",
    "DPFedPFT",
    "Ensemble",
    "FLea",
    "FeatureRecalibration",
    "FedAA",
    "FedAdagrad",
    "FedAdam",
    "FedAvg",
    "FedAvgFT",
    "FedAvgM",
    "FedBABU",
    "FedBE",
    "FedBN",
    "FedBR",
    "FedData",
    "FedDecorr",
    "FedDistill",
    "FedDyn",
    "FedGH",
    "FedGen",
    "FedGenInput",
    "FedKD",
    "FedKT",
    "FedLC",
    "FedMRL",
    "FedMix",
    "FedNTD",
    "FedPFT",
    "FedPFTChain",
    "FedProto",
    "FedProx",
    "FedRS",
    "FedTGP",
    "FedYogi",
    "KnowledgeDistillation",
    "LGFedAvg",
    "LocalOnly",
    "Message",
    "MixFL",
    "OneShotAverage",
    "Phase",
    "ReBaFL",
    "Scaffold",
    "SetupContext",
    "Standalone",
    "Strategy",
    "Update",
    "XorMixFL",
    "make_strategy",
    "register_strategy",
]
