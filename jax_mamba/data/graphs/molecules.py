"""Generated peptide-like molecules: a stand-in for LRGB's peptides-func where the real dataset is absent (offline
machines, benchmarks), with its sizes and its feature encoding, not its chemistry.

Each molecule is a chain of residues: a backbone N - CA - C(=O) per residue, peptide bonds C -> N between residues,
and a side chain on CA (a short branch, sometimes closing a 5- or 6-ring, sometimes carrying S or O). About 150
atoms (heavy tail to about 440) and 1.03 bonds per atom, as peptides-func has. Atoms carry OGB's nine categorical
columns (atomic number - 1, chirality, degree, formal charge + 5, hydrogens, radicals, hybridization, aromatic, in
ring), bonds OGB's three (type, stereo, conjugated). Ten binary labels are functions of the structure (rings,
sulfur, length, branching...), so a model can learn them; both bond directions are listed."""

import numpy as np

from jax_mamba.data.graphs.graph import Graph

CARBON, NITROGEN, OXYGEN, SULFUR = 5, 6, 7, 15  # OGB's atomic-number index (atomic number - 1)
SINGLE, DOUBLE, AROMATIC = 0, 1, 3  # OGB's bond types
NUM_LABELS = 10


class _Builder:
    def __init__(self):
        self.atoms: list[int] = []
        self.ring: list[int] = []
        self.bonds: list[tuple[int, int, int]] = []

    def atom(self, element: int, bonded_to: int | None = None, bond: int = SINGLE) -> int:
        self.atoms.append(element)
        self.ring.append(0)
        index = len(self.atoms) - 1
        if bonded_to is not None:
            self.bonds.append((bonded_to, index, bond))
        return index


def _side_chain(b: _Builder, ca: int, rng: np.random.Generator) -> dict:
    """A random side chain on atom ``ca``; returns what the labels read (rings, aromatic, sulfur, oxygen)."""
    kind = rng.choice(["none", "branch", "ring", "sulfur", "hydroxyl"], p=[0.1, 0.4, 0.2, 0.1, 0.2])
    facts = {"ring": 0, "aromatic": 0, "sulfur": 0, "hydroxyl": 0, "atoms": 0}
    if kind == "none":
        return facts
    tip = b.atom(CARBON, ca)
    for _ in range(rng.integers(0, 4)):
        tip = b.atom(CARBON, tip)
    if kind == "ring":
        size = int(rng.choice([5, 6]))
        aromatic = size == 6 and rng.random() < 0.7
        bond = AROMATIC if aromatic else SINGLE
        first = prev = b.atom(CARBON, tip)
        members = [first]
        for _ in range(size - 1):
            prev = b.atom(NITROGEN if rng.random() < 0.15 else CARBON, prev, bond)
            members.append(prev)
        b.bonds.append((prev, first, bond))
        for m in members:
            b.ring[m] = 2 if aromatic else 1
        facts.update(ring=1, aromatic=int(aromatic))
    elif kind == "sulfur":
        b.atom(SULFUR, tip)
        facts["sulfur"] = 1
    elif kind == "hydroxyl":
        b.atom(OXYGEN, tip)
        facts["hydroxyl"] = 1
    return facts


def peptide_like(rng: np.random.Generator) -> Graph:
    """One molecule: 5 to 50 residues (median about 18.5, about 8.3 atoms per residue)."""
    residues = int(np.clip(rng.lognormal(np.log(18.5), 0.42), 5, 50))
    b = _Builder()
    counts = {"ring": 0, "aromatic": 0, "sulfur": 0, "hydroxyl": 0}
    previous_c = None
    for _ in range(residues):
        n = b.atom(NITROGEN, previous_c)
        ca = b.atom(CARBON, n)
        c = b.atom(CARBON, ca)
        b.atom(OXYGEN, c, DOUBLE)
        facts = _side_chain(b, ca, rng)
        for key in counts:
            counts[key] += facts[key]
        previous_c = c
    cyclic = rng.random() < 0.1
    if cyclic:
        b.bonds.append((previous_c, 0, SINGLE))
    bonds = np.array(b.bonds, np.int64)
    num_atoms = len(b.atoms)
    degree = np.bincount(bonds[:, :2].ravel(), minlength=num_atoms)
    elements = np.array(b.atoms)
    valence = np.select([elements == CARBON, elements == NITROGEN], [4, 3], 2)
    hydrogens = np.clip(valence - degree, 0, 4)
    ring = np.array(b.ring)
    aromatic = ring == 2
    hybridization = np.where(aromatic, 2, np.where(degree >= 4, 3, 2))
    x = np.stack(
        [
            elements,
            np.zeros(num_atoms, np.int64),
            np.minimum(degree, 11),
            np.full(num_atoms, 5),
            hydrogens,
            np.zeros(num_atoms, np.int64),
            hybridization,
            aromatic.astype(np.int64),
            (ring > 0).astype(np.int64),
        ],
        axis=1,
    )
    bond_type = bonds[:, 2]
    edge_attr = np.stack([bond_type, np.zeros_like(bond_type), (bond_type != SINGLE).astype(np.int64)], axis=1)
    senders, receivers = bonds[:, 0], bonds[:, 1]
    edge_index = np.stack([np.concatenate([senders, receivers]), np.concatenate([receivers, senders])])
    labels = np.array(
        [
            counts["ring"] >= 2,
            counts["aromatic"] >= 1,
            counts["sulfur"] >= 1,
            counts["hydroxyl"] >= 3,
            residues >= 20,
            cyclic,
            counts["ring"] == 0,
            counts["sulfur"] >= 1 and counts["aromatic"] >= 1,
            num_atoms >= 160,
            counts["hydroxyl"] > counts["ring"],
        ],
        np.float32,
    )
    return Graph(x=x, edge_index=edge_index, y=labels, edge_attr=np.concatenate([edge_attr, edge_attr]))


def peptide_like_graphs(num_graphs: int, seed: int) -> list[Graph]:
    """``num_graphs`` molecules, deterministic in ``seed``."""
    rng = np.random.default_rng([seed, 0x5E9])
    return [peptide_like(rng) for _ in range(num_graphs)]
