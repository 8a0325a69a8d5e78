"""Domain detection for requests and outputs that name no domain (see `detector.py`)."""

from knowledge_graphs.detection.detector import DEFAULT_THRESHOLD, Detection, DetectionState, DomainDetector

__all__ = ["DEFAULT_THRESHOLD", "Detection", "DetectionState", "DomainDetector"]
