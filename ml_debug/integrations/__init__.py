"""Callbacks for the trainers people use: hf (transformers.Trainer) and lightning (lightning.Trainer).

Each imports its framework; the core of ml_debug never does.
"""
