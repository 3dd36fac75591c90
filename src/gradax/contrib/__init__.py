"""gradax.contrib."""

# part A
from ._acprop import acprop as acprop
from ._acprop import scale_by_acprop as scale_by_acprop
from ._ademamix import ScaleByAdemamixState as ScaleByAdemamixState
from ._ademamix import ScaleBySimplifiedAdEMAMixState as ScaleBySimplifiedAdEMAMixState
from ._ademamix import ademamix as ademamix
from ._ademamix import scale_by_ademamix as scale_by_ademamix
from ._ademamix import scale_by_simplified_ademamix as scale_by_simplified_ademamix
from ._ademamix import simplified_ademamix as simplified_ademamix
from ._adopt import adopt as adopt
from ._adopt import scale_by_adopt as scale_by_adopt
from ._cocob import COCOBState as COCOBState
from ._cocob import cocob as cocob
from ._cocob import scale_by_cocob as scale_by_cocob
from ._dadapt_adamw import DAdaptAdamWState as DAdaptAdamWState
from ._dadapt_adamw import dadapt_adamw as dadapt_adamw
from ._dog import DoGState as DoGState
from ._dog import DoWGState as DoWGState
from ._dog import dog as dog
from ._dog import dowg as dowg
from ._madgrad import MadgradState as MadgradState
from ._madgrad import madgrad as madgrad
from ._madgrad import scale_by_madgrad as scale_by_madgrad

# part B
from ._schedule_free import ScheduleFreeState as ScheduleFreeState
from ._schedule_free import schedule_free as schedule_free
from ._schedule_free import schedule_free_adamw as schedule_free_adamw
from ._schedule_free import schedule_free_eval_params as schedule_free_eval_params
from ._schedule_free import schedule_free_sgd as schedule_free_sgd
from ._muon import MuonDimensionNumbers as MuonDimensionNumbers
from ._muon import MuonState as MuonState
from ._muon import muon as muon
from ._muon import scale_by_muon as scale_by_muon

# part B3
from ._normalize import NormalizeState as NormalizeState
from ._normalize import normalize as normalize
from ._complex import SplitRealAndImaginaryState as SplitRealAndImaginaryState
from ._complex import split_real_and_imaginary as split_real_and_imaginary
from ._prodigy import ProdigyState as ProdigyState
from ._prodigy import prodigy as prodigy
from ._sophia import SophiaState as SophiaState
from ._sophia import sophia as sophia

# part C
from ._privacy import DifferentiallyPrivateAggregateState as DifferentiallyPrivateAggregateState
from ._privacy import differentially_private_aggregate as differentially_private_aggregate
from ._privacy import dpsgd as dpsgd
from ._hutchinson import HutchinsonState as HutchinsonState
from ._hutchinson import hutchinson_estimator_diag_hessian as hutchinson_estimator_diag_hessian
from ._galore import GaLoreDimensionNumbers as GaLoreDimensionNumbers
from ._galore import GaLoreState as GaLoreState
from ._galore import galore as galore
from ._galore import scale_by_galore as scale_by_galore

# part B2
from ._reduce_on_plateau import ReduceLROnPlateauState as ReduceLROnPlateauState
from ._reduce_on_plateau import reduce_on_plateau as reduce_on_plateau
from ._sam import SAMState as SAMState
from ._sam import sam as sam
from ._mechanic import MechanicState as MechanicState
from ._mechanic import mechanize as mechanize

# part B4
from ._momo import MomoState as MomoState
from ._momo import momo as momo
from ._momo import MomoAdamState as MomoAdamState
from ._momo import momo_adam as momo_adam

# first-order optimizers (issue 18)
from ._mars import ScaleByMarsState as ScaleByMarsState
from ._mars import mars as mars
from ._mars import scale_by_mars as scale_by_mars
from ._laprop import ScaleByLaPropState as ScaleByLaPropState
from ._laprop import laprop as laprop
from ._laprop import scale_by_laprop as scale_by_laprop
from ._grams import ScaleByGramsState as ScaleByGramsState
from ._grams import grams as grams
from ._grams import scale_by_grams as scale_by_grams

# issue 17: SOAP and Shampoo
from ._soap import SOAPState as SOAPState
from ._soap import scale_by_soap as scale_by_soap
from ._soap import soap as soap
from ._shampoo import ShampooState as ShampooState
from ._shampoo import scale_by_shampoo as scale_by_shampoo
from ._shampoo import shampoo as shampoo

# matrix optimizers (issue 17: Muon family, PSGD-Kron, Scion)
from ._muon_family import AdaMuonState as AdaMuonState
from ._muon_family import NorMuonState as NorMuonState
from ._muon_family import adamuon as adamuon
from ._muon_family import muon_clip as muon_clip
from ._muon_family import normuon as normuon
from ._muon_family import scale_by_adamuon as scale_by_adamuon
from ._muon_family import scale_by_normuon as scale_by_normuon
from ._scion import ScionState as ScionState
from ._scion import scale_by_scion as scale_by_scion
from ._scion import scion as scion
from ._kron import KronState as KronState
from ._kron import kron as kron
from ._kron import precond_update_prob_schedule as precond_update_prob_schedule
from ._kron import scale_by_kron as scale_by_kron
from ._came import ScaleByCameState as ScaleByCameState
from ._came import came as came
from ._came import scale_by_came as scale_by_came
from ._spam import ScaleBySpamState as ScaleBySpamState
from ._spam import scale_by_spam as scale_by_spam
from ._spam import spam as spam
from ._adam_mini import ScaleByAdamMiniState as ScaleByAdamMiniState
from ._adam_mini import adam_mini as adam_mini
from ._adam_mini import scale_by_adam_mini as scale_by_adam_mini
from ._apollo import ScaleByApolloState as ScaleByApolloState
from ._apollo import apollo as apollo
from ._apollo import apollo_mini as apollo_mini
from ._apollo import scale_by_apollo as scale_by_apollo
