"""openbook: Retrieval-Augmented Generation (Lewis et al., 2020), faithful, fast and offline-first."""

__version__ = "0.1.0"
