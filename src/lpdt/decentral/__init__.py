"""Decentralized training: topologies and mixing matrices, compression, gossip algorithms
(SGP / D-PSGD, Deep-Squeeze, CHOCO-SGD with push-sum), optimizers (SGD, QGM, Adam) and the flat
node-state engine."""
