"""Calibration: learn, from a user's own manual labels, how the judge's signals map to their classes.

The judge's signals for an item (the expected score of each metric graded, or the discrete score where there is no
expected score) form a feature vector; the manual labels are ordinal classes (worst first, as in a `LabelMapping`).
A multinomial logistic regression (scikit-learn) maps features to class probabilities, its class weighting
(balanced or none) chosen by the labels themselves, out of fold. Small judges are
overconfident in their discrete score, while the probability they put on each digit ranks items well: this is how
juiz turns that ranking into labels that match the people who label the same items.

One module per part, each importing only the ones listed above it:

    features   a judgement's feature vector; labelled results as a feature matrix and class indices
    model      `Calibration`: the fitted model, its file (`CalibrationSpec`) and its predictions
    grades     a calibration applied to a judgement: its `calibrated` grade and provenance
    figures    Brier score, ECE and the reliability table of a set of class probabilities
    fitting    cross-fitted (held-out) figures, the class weighting, the final fit; `CalibrationUnavailable`
    agreement  raw vs calibrated agreement side by side; applied calibrations as an agreement signal

This package imports none of them, so what applies a calibration (`grades`, on every result a worker stores) loads
neither the fitting nor the agreement statistics.
"""
